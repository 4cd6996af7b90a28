"""Fine-tuning pre-trained models on downstream tasks: data, heads, training and metrics."""
