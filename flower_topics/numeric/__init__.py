"""Private numeric helpers of the compiled kernels: reused work arrays, vectorized categorical draws,
a document's words as a block of topic columns, and a batch of documents split over threads."""
