-- a window join is an ordinary join on window_start
SELECT a.window_start, a.product, COUNT(*) AS pairs
FROM TUMBLE(clicks, ts, INTERVAL '10 minutes') a
JOIN TUMBLE(clicks, ts, INTERVAL '10 minutes') b ON a.window_start = b.window_start AND a.product = b.product
WHERE a.n < b.n GROUP BY a.window_start, a.product
