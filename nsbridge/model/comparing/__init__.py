"""Two runs, or the same script several times: whether they can be compared
(``comparability``), what an op computes apart from its time (``work``), steady per-step
times (``steady``), several processes pooled (``pooled``), two runs op by op (``diff``) or
in interleaved pairs (``paired``), one change judged against the threshold (``change``) and
the answer both give (``gate_answer``)."""
