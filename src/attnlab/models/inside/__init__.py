"""Inside a real model: the named points of its forward pass (cache and hooks), ablation,
activation patching, the logit lens and attribution, and generation with a key/value cache."""
