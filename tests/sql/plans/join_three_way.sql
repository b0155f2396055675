-- three tables, a self-join, and a cross-side WHERE condition above the joins
SELECT a.product, i.category, COUNT(*) AS n
FROM visit a JOIN visit b ON a.product = b.product JOIN info i ON b.product = i.product
WHERE a.length < b.length
GROUP BY a.product, i.category
