// Anchor for the precompiled <torch/torch.h> shared by all txl targets.
