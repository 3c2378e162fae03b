"""Versioned storage of skeletons and their calibrations for liftguard."""
