-- RIGHT JOIN with an ON condition on the padded (left) side: it filters that input
SELECT i.product, i.category, v.length
FROM visit v RIGHT JOIN info i ON v.product = i.product AND v.length > 20
