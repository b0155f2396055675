-- ORDER BY without LIMIT changes nothing in a view
SELECT product, length FROM visit ORDER BY length
