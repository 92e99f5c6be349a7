"""What each owner (a caller's principal) may use of a fleet many share."""
