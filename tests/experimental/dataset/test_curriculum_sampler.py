"""AbstractCurriculumSampler as a user sampler loaded through data.sampler.class_path."""

import pytest
import torch
from omegaconf import OmegaConf

from verl import DataProto
from verl.experimental.dataset.sampler import AbstractCurriculumSampler, AbstractSampler
from verl.utils.dataset.sampler import create_rl_sampler

USER_SAMPLER = """
import torch
from verl.experimental.dataset.sampler import AbstractCurriculumSampler


class HardestFirst(AbstractCurriculumSampler):
    def __init__(self, data_source, data_config):
        self.size = len(data_source)
        self.failures = [0.0] * self.size

    def __iter__(self):
        return iter(sorted(range(self.size), key=lambda i: (-self.failures[i], i)))

    def __len__(self):
        return self.size

    def update(self, batch):
        for index, score in zip(batch.non_tensor_batch["index"], batch.batch["score"].tolist()):
            self.failures[int(index)] += 1.0 - score
"""


def test_user_curriculum_sampler_is_built_and_updated(tmp_path):
    path = tmp_path / "curriculum.py"
    path.write_text(USER_SAMPLER)
    data_config = OmegaConf.create({"sampler": {"class_path": str(path), "class_name": "HardestFirst"}})
    sampler = create_rl_sampler(data_config, list(range(4)))
    assert isinstance(sampler, AbstractCurriculumSampler) and isinstance(sampler, AbstractSampler)
    assert list(sampler) == [0, 1, 2, 3]
    batch = DataProto.from_dict(tensors={"score": torch.tensor([1.0, 0.0])}, non_tensors={"index": [1, 3]})
    sampler.update(batch)
    assert list(sampler) == [3, 0, 1, 2]


def test_the_interface_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        AbstractCurriculumSampler(data_source=[], data_config={})

    class NoUpdate(AbstractCurriculumSampler):
        def __init__(self, data_source, data_config):
            pass

    with pytest.raises(TypeError, match="update"):
        NoUpdate([], {})
