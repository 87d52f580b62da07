"""cupy.cuda.memory of the strict stand-in: the error cupy's allocator raises when a device
allocation does not fit (cupy/cuda/memory.pyx, OutOfMemoryError)."""


class OutOfMemoryError(MemoryError):
    def __init__(self, size: int, free: int, total: int) -> None:
        super().__init__(
            f"Out of memory allocating {size:,} bytes ({free:,} bytes free of {total:,})."
        )
