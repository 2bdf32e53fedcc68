"""What is measured of a trained model after training, through the backend contract
(:class:`dpcore.backend.Backend`: ``predict_proba``, ``gradcam``, ``build_model``,
``set_weights``), one code path for both frameworks:

* :mod:`~dpcore.evaluation.faithfulness`: Grad-CAM faithfulness on a seeded test subset, with
* :mod:`~dpcore.evaluation.randomisation`: the model-randomisation check of its maps, and
* :mod:`~dpcore.evaluation.calibrated`: its figures after temperature scaling;
* :mod:`~dpcore.evaluation.ldp`: a local-DP run's test metrics on clean and privatised images;
* :mod:`~dpcore.evaluation.membership`: the membership-inference audit (TF Privacy's attacks,
  run by the ``tf`` backend for models of either backend);
* :mod:`~dpcore.evaluation.explain`: a model's predictions and Grad-CAM maps of montage
  images (the arrays a report's montage is drawn from).

The numbers themselves are the numpy metrics of :mod:`dpcore.metrics`; these modules feed
them a model's outputs.
"""
