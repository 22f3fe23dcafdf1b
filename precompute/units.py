"""Units of time, in whole seconds: every module that converts a duration uses these (integers, so that a setting's
default such as ``7 * DAY`` stays an integer number of seconds)."""

HOUR = 3600
DAY = 86400
