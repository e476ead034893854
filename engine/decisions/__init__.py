"""The four decisions (filter, score, preempt, admit) and what they share: matching, evaluation, the request deadline."""
