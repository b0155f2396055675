-- rn = 1: deduplication
SELECT product, "user", length FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY product
    ORDER BY length DESC NULLS LAST) AS rn FROM visit) t WHERE rn = 1
