"""Units of time, in seconds: every module that converts a duration uses these."""

HOUR = 3600.0
DAY = 86400.0
