"""What a new user meets in the first hour: their own SparkSession, psql, the README's blocks, bad
input, misleading errors. Each test here failed on the main of 2026-11-28 (issue: first contact)."""
