"""`torch.utils.data`: datasets, samplers and the DataLoader, with PyTorch's names, arguments
and behaviour. `num_workers > 0` loads batches on threads (not processes), which prefetch
while the training step runs: numpy releases the GIL in its kernels, so decoding and
augmentation written with numpy overlap with the step (see `DataLoader`)."""
from .dataloader import DataLoader, default_collate, default_convert, get_worker_info
from .dataset import (ConcatDataset, Dataset, IterableDataset, StackDataset, Subset,
                      TensorDataset, random_split)
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                      SubsetRandomSampler, WeightedRandomSampler)

__all__ = ["BatchSampler", "ConcatDataset", "DataLoader", "Dataset", "IterableDataset",
           "RandomSampler", "Sampler", "SequentialSampler", "StackDataset", "Subset",
           "SubsetRandomSampler", "TensorDataset", "WeightedRandomSampler", "default_collate",
           "default_convert", "get_worker_info", "random_split"]
