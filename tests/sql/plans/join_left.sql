-- LEFT JOIN: the right side is padded; WHERE on the padded side stays above the join
SELECT v.product, v.length, i.category
FROM visit v LEFT JOIN info i ON v.product = i.product
WHERE i.category IS NULL OR v.length > 3
