"""A Message-API Flower app using fedleak's secure aggregation."""
