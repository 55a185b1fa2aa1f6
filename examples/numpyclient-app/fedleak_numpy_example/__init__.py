"""A NumPyClient Flower app using fedleak's secure aggregation."""
