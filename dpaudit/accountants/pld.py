"""(placeholder: to be implemented)"""

__all__: list[str] = []
