"""``factrl serve``: the trained verifier as an HTTP service and a web page (issue 40).

* :mod:`~factrl.service.params`: the ``serve`` section of params.yaml (:class:`ServeParams`) and the
  checkpoints it names, resolved as everywhere else (``base``, ``warm``, ``last``, ``openai:MODEL@URL``);
* :mod:`~factrl.service.engine`: one checkpoint pair as a batched verifier: HARIS over the index, each
  claim's verdict with its citations, trace, tokens and cost;
* :mod:`~factrl.agents.citations`: the sentence of a retrieved passage that backs a search report;
* :mod:`~factrl.service.usage`: model calls, tokens and cost of a trajectory;
* :mod:`~factrl.service.confidence`: the raw score of a run and its calibration;
* :mod:`~factrl.service.decompose`: a text split into claims with character offsets;
* :mod:`~factrl.service.jobs`: jobs, and the one worker that batches the claims in flight, within bounds;
* :mod:`~factrl.service.corrections`: reviewers' corrections in SQLite, exported as a claim file;
* :mod:`~factrl.service.state`: what the app serves (:class:`~factrl.service.state.Service`), put
  together from params in one place;
* :mod:`~factrl.service.routes`: the routes, grouped in routers (health, page, verify, jobs, corrections);
* :mod:`~factrl.service.app`: the FastAPI app (the routers, the token), ``build_service`` and ``main``
  (``factrl serve``).
"""
