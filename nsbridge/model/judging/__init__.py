"""What bounds the run and what to do about it: the verdict with its confidence and the
numbers behind it (``verdict``), whether the machine's contention rather than the script
set the time (``contention``), and the recommendations, each tied to the finding that fired
it (``rules``)."""
