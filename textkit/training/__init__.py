"""Losses, schedules, the train-step factory, checkpoints and metrics."""
