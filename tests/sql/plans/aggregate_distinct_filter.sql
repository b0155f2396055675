-- DISTINCT aggregates and FILTER (WHERE ...)
SELECT product, COUNT(DISTINCT "user") AS du, SUM(DISTINCT length) AS sd, AVG(DISTINCT length) AS ad,
       COUNT(*) FILTER (WHERE length > 50) AS big, MAX(length) FILTER (WHERE "user" IS NOT NULL) AS mx
FROM visit GROUP BY product
