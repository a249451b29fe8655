"""The package's version, in a module of its own: the stored records and exports name it, and importing it imports
nothing else of the package (the package's face, :mod:`autotune`, sits above everything)."""

__version__ = "0.1.0"
