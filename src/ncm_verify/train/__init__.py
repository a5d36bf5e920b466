"""`make train` (issue 24): the data, the training runs and the record of the shipped text models.

It sits above the reference: the models it trains are `reference.drafting`'s, and nothing under test imports it.
"""
