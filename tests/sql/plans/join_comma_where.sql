-- FROM a, b WHERE a.k = b.k: the WHERE equality becomes the join key; one-sided conjuncts go below
SELECT i.category, v."user" FROM visit v, info i
WHERE v.product = i.product AND v.length > 60 AND i.category <> 'c1'
