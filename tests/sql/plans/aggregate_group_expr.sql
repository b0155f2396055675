-- GROUP BY an expression
SELECT length / 25 AS bucket, COUNT(*) AS n FROM visit GROUP BY length / 25
