"""Evaluation library: metrics (accuracy, weighted P/R/F1, bootstrap CIs), stratified sampling,
the Table 1 markdown report, offline Vega-Lite plots and the HTML trace viewer."""
