"""Classify Python standard-library docstrings by module with a tiny BERT and the
Hugging Face Trainer.

The data is real English text that ships with Python: the docstring sentences of
the public functions and classes of four stdlib modules; the label is the
module. The tokenizer (lowercased words, vocabulary from the training split) and
the model (a small BertForSequenceClassification built from a BertConfig) are
defined here, so nothing is downloaded.

Run on one process, on the CPU:

    python hf_textclf.py --output_dir hf_out --num_train_epochs 5 \
        --eval_strategy epoch --save_strategy epoch --learning_rate 1e-3 \
        --per_device_train_batch_size 16 --report_to none --use_cpu

Run data-parallel on two processes (same flags), launched by torchrun:

    torchrun --nproc-per-node 2 hf_textclf.py --output_dir hf_out ...

Resume with ``--resume_from_checkpoint hf_out/checkpoint-N``.
"""
import collections
import importlib
import inspect
import json
import os
import random
import re
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
)

MODULES = ["logging", "pathlib", "shutil", "statistics"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]"]  # ids 0, 1, 2


@dataclass
class ModelArguments:
    hidden_size: int = field(default=128, metadata={"help": "BERT hidden size"})
    num_layers: int = field(default=2, metadata={"help": "number of transformer layers"})
    num_heads: int = field(default=4, metadata={"help": "attention heads per layer"})
    dropout: float = field(default=0.1, metadata={"help": "hidden and attention dropout"})


@dataclass
class DataArguments:
    max_length: int = field(default=32, metadata={"help": "tokens per example, padded or cut"})
    max_examples: int = field(default=600, metadata={"help": "cap on train + validation examples"})


def docstring_sentences(module_name):
    """Sentences of the docstrings of a module's public functions, classes and methods."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    objects = []
    for name in sorted(names):
        obj = getattr(module, name, None)
        if inspect.isclass(obj):
            objects.append(obj)
            objects += [m for n, m in sorted(vars(obj).items()) if not n.startswith("_") and inspect.isfunction(m)]
        elif inspect.isfunction(obj):
            objects.append(obj)
    sentences = []
    for obj in objects:
        for paragraph in re.split(r"\n\s*\n", inspect.getdoc(obj) or ""):
            for sentence in re.split(r"(?<=[.!?])\s+", " ".join(paragraph.split())):
                if len(re.findall(r"\w+", sentence)) >= 4 and sentence not in sentences:
                    sentences.append(sentence)
    return sentences


def load_examples(max_examples):
    """(text, label) pairs, shuffled with a fixed seed; every 4th one goes to validation."""
    examples = [(s, label) for label, m in enumerate(MODULES) for s in docstring_sentences(m)]
    random.Random(0).shuffle(examples)
    examples = examples[:max_examples]
    train = [ex for i, ex in enumerate(examples) if i % 4 != 3]
    val = [ex for i, ex in enumerate(examples) if i % 4 == 3]
    return train, val


def words(text):
    return re.findall(r"\w+", text.lower())


def build_vocab(texts, max_size=2000):
    counts = collections.Counter(w for t in texts for w in words(t))
    ranked = sorted(counts, key=lambda w: (-counts[w], w))[: max_size - len(SPECIAL)]
    return {w: i for i, w in enumerate(SPECIAL + ranked)}


class TextDataset(torch.utils.data.Dataset):
    def __init__(self, examples, vocab, max_length):
        self.examples, self.vocab, self.max_length = examples, vocab, max_length

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, i):
        text, label = self.examples[i]
        ids = [2] + [self.vocab.get(w, 1) for w in words(text)][: self.max_length - 1]
        mask = [1] * len(ids) + [0] * (self.max_length - len(ids))
        ids = ids + [0] * (self.max_length - len(ids))
        return {
            "input_ids": torch.tensor(ids),
            "attention_mask": torch.tensor(mask),
            "labels": torch.tensor(label),
        }


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}


def main():
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()

    train, val = load_examples(data_args.max_examples)
    vocab = build_vocab(text for text, _ in train)
    train_set = TextDataset(train, vocab, data_args.max_length)
    val_set = TextDataset(val, vocab, data_args.max_length)

    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=model_args.hidden_size,
        num_hidden_layers=model_args.num_layers,
        num_attention_heads=model_args.num_heads,
        intermediate_size=4 * model_args.hidden_size,
        hidden_dropout_prob=model_args.dropout,
        attention_probs_dropout_prob=model_args.dropout,
        max_position_embeddings=max(64, data_args.max_length),
        pad_token_id=0,
        num_labels=len(MODULES),
        id2label=dict(enumerate(MODULES)),
        label2id={m: i for i, m in enumerate(MODULES)},
    )
    torch.manual_seed(training_args.seed)
    model = BertForSequenceClassification(config)
    # The model averages its loss over the batch itself; say so, or the Trainer
    # multiplies the loss by the number of processes under torchrun.
    model.accepts_loss_kwargs = False

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=val_set,
        compute_metrics=compute_metrics,
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model()
    if trainer.is_world_process_zero():
        with open(os.path.join(training_args.output_dir, "vocab.json"), "w") as f:
            json.dump(vocab, f)


if __name__ == "__main__":
    main()
