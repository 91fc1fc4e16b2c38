"""The video scheduling policy: ETAs, admission and the capacity plan, as plain functions that
return decisions. The API maps a decision to HTTP; the planner reads it directly."""
