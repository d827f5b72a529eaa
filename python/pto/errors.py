"""The exception every part of pto raises for a runtime's error."""


class Error(RuntimeError):
    """A runtime error: ``code`` (the number), ``name`` (e.g. ``"TASK_RING_DEADLOCK"``)
    and ``message`` — the runtime's whole message, a deadlock's diagnosis and
    advice included.

    >>> try:
    ...     pto.chip.run(config, inputs, task_window=4)
    ... except pto.Error as e:
    ...     print(e.name, e.message)
    """

    def __init__(self, code: int, name: str, message: str) -> None:
        super().__init__(f"{name} ({code}): {message}")
        self.code = code
        self.name = name
        self.message = message
