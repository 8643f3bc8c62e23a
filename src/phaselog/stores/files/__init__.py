"""The default store: the seed tool's files plus phaselog's sidecars."""
