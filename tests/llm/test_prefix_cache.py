"""The engine's prefix cache (``factrl.llm.prefix_cache``): longest shared prefix, redundant entries, LRU eviction."""

import torch

from factrl.llm.prefix_cache import PrefixCache


def test_prefix_cache_lookup_and_eviction():
    def kv(n):  # two layers of [heads=1, n, head_dim=2] float32: 2 * 2 * n * 2 * 4 = 32 n bytes
        return [(torch.full((1, n, 2), float(n)), torch.zeros(1, n, 2)) for _ in range(2)]

    cache = PrefixCache(max_bytes=32 * 10)
    cache.put([1, 2, 3], kv(3))
    entry, n = cache.longest(torch.tensor([1, 2, 9, 9]))
    assert n == 2 and entry.ids.tolist() == [1, 2, 3]  # a shared prefix counts, not only extensions
    assert cache.longest(torch.tensor([7, 1, 2]))[1] == 0
    cache.put([1, 2, 3, 4], kv(4))  # extends [1, 2, 3]: the shorter entry is redundant and dropped
    assert len(cache) == 1 and cache.nbytes == 32 * 4
    cache.put([1, 2], kv(2))  # covered by [1, 2, 3, 4]: not stored
    assert len(cache) == 1
    cache.put([5, 6, 7], kv(3))
    assert len(cache) == 2 and cache.nbytes == 32 * 7
    cache.longest(torch.tensor([1, 2, 3, 4]))  # touch: [5, 6, 7] is now the least recently used
    cache.put([8, 9, 10, 11], kv(4))  # 11 * 32 bytes > budget: evict LRU
    assert cache.longest(torch.tensor([5, 6, 7]))[1] == 0
    assert cache.longest(torch.tensor([1, 2, 3, 4, 5]))[1] == 4 and cache.nbytes <= cache.max_bytes
    cache.put(list(range(100, 112)), kv(12))  # larger than the whole budget: never stored
    assert cache.longest(torch.tensor([100, 101]))[1] == 0 and cache.nbytes <= cache.max_bytes
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0
