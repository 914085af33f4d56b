//! The CUDA backend (placeholder until the CUDA issue lands).
