-- WHERE and scalar expressions
SELECT product, length * 2 AS doubled, upper("user") AS who FROM visit WHERE length % 3 = 0 AND "user" IS NOT NULL
