"""The kinds of event the planner's simulation schedules, shared by its engine and its fleet."""

# Event kinds, in tie order at one instant: GPUs leave and join before work moves.
GONE, JOIN, RECLAIM, RESTORE, PREEMPT, SCHEDULED, FINISH, RELEASE, RETRY, ARRIVAL, REFRESH = range(11)
