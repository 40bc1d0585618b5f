"""placeholder"""
__all__ = []
