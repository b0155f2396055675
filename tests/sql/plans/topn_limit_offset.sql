-- ORDER BY ... LIMIT ... OFFSET: one top-N over the whole input
SELECT product, "user", length FROM visit
ORDER BY length DESC NULLS LAST, product, "user" NULLS FIRST LIMIT 3 OFFSET 1
