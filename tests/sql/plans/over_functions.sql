-- window functions as ordinary output columns: running and moving aggregates, ranks, LAG, a whole-partition count
SELECT product, length,
    SUM(length) OVER (PARTITION BY product ORDER BY length) AS running,
    AVG(length) OVER (PARTITION BY product ORDER BY length ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS moving,
    RANK() OVER (PARTITION BY product ORDER BY length) AS r,
    length - LAG(length, 1, 0) OVER (PARTITION BY product ORDER BY length) AS step,
    COUNT(*) OVER (PARTITION BY product) AS n,
    DENSE_RANK() OVER (ORDER BY "user" DESC) AS d
FROM visit
