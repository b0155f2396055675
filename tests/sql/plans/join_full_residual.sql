-- FULL OUTER JOIN with a non-equality ON condition: the residual decides the padding
SELECT v.product AS vp, v.length, i.product AS ip, i.category
FROM visit v FULL OUTER JOIN info i ON v.product = i.product AND i.category <> 'c0'
