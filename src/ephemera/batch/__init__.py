"""`batch/v1` semantics shared by the apiserver and the controllers, pure: Jobs (`jobs`:
defaults, the generated selector, validation of create and update, conditions) and
CronJobs (`cronjobs`: defaults, validation, schedules)."""
