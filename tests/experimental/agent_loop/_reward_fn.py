"""A rule reward for agent-loop tests: the number of characters of the decoded response."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(len(solution_str))
