"""Figures from results. Functions take results and return a matplotlib Figure; they never simulate or write."""
