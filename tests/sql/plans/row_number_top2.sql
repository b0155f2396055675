-- ROW_NUMBER() filtered by rn <= N: a per-partition top-N that keeps its positions
SELECT * FROM (SELECT product, "user", length,
                      ROW_NUMBER() OVER (PARTITION BY "user" ORDER BY length NULLS FIRST, product) AS rn
               FROM visit) t
WHERE rn <= 2
