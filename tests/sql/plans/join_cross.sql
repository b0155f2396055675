-- CROSS JOIN with a subquery: no keys (one partition)
SELECT c.category, COUNT(*) AS n, SUM(v.length) AS s
FROM visit v CROSS JOIN (SELECT DISTINCT category FROM info) c
GROUP BY c.category
