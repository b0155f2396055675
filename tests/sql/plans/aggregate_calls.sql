-- COUNT(*), COUNT(x), SUM, AVG (as SUM / COUNT), MIN, MAX, HAVING
SELECT "user", COUNT(*) AS n, COUNT(length) AS nl, SUM(length) AS s, AVG(length) AS a,
       MIN(length) AS lo, MAX(length) AS hi
FROM visit GROUP BY "user" HAVING COUNT(*) > 1
