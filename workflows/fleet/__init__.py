"""The fleet controller: how many GPU workers each model version, class and capacity type gets."""
