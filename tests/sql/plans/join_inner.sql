-- inner equi-join, aggregate over it (the shopping example)
SELECT category, MAX(length) AS max_length
FROM info JOIN visit ON info.product = visit.product
GROUP BY category
