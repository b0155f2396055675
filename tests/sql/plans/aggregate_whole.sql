-- no GROUP BY: one row, also over empty input
SELECT COUNT(*) AS n, SUM(length) AS s, MAX(length) AS hi FROM visit WHERE length > 50
