"""One short module per config.json ``model_type``: each maps its config keys and tensor names
onto the shared decoder (``attnlab.models._decoder``) and exposes ``shape_of(cfg)`` and
``build(cfg, checkpoint)``."""
