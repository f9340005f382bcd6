"""Scientific questions with their own pages (judges against the truth, verification rules, the pivot tuning)."""
