"""Fakes of the outside world shared by several test modules."""

from types import SimpleNamespace


class FakeNvml:
    """The pynvml functions gpu.query_gpus calls, answering for the given GPUs."""

    def __init__(self, gpus=(), driver="535.183.01", cuda=12020, error=None):
        self.gpus, self.driver, self.cuda, self.error = list(gpus), driver, cuda, error

    def nvmlInit(self):
        if self.error:
            raise RuntimeError(self.error)

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return self.driver.encode()

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self.gpus[handle][0]

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self.gpus[handle][1]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=self.gpus[handle][2], free=self.gpus[handle][2] - 300 * 2**20)
