-- an OR over two items: each is also filtered below the join by the OR of its own conditions
SELECT i.category, v.length
FROM info i, visit v
WHERE i.product = v.product AND ((i.category = 'a' AND v.length > 10) OR (i.category = 'b' AND v.length < 5))
