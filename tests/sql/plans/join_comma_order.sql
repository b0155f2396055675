-- comma joins, no equality between the first two items: the third joins second (no cross product)
SELECT i.category, c.n, v.length
FROM info i, clicks c, visit v
WHERE i.product = v.product AND c.product = v.product
