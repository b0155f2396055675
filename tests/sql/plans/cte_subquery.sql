-- WITH (CTEs) and subqueries in FROM
WITH per AS (SELECT product, COUNT(*) AS n FROM visit GROUP BY product)
SELECT i.category, SUM(p.n) AS n FROM (SELECT * FROM info WHERE category IS NOT NULL) i
JOIN per p ON i.product = p.product GROUP BY i.category
