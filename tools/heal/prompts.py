"""Training prompts for healing the early exit, written for this project.

Built from templates with seeded fills, so the set is reproducible and holds
no benchmark problem: the evaluation sets under `data/eval/` are never read
here, and `teacher.py` refuses a prompt that equals one of their questions.
A third of the prompts ask for a short answer (a number, a word, a letter),
as users ask quick questions; their words and operands are our own lists
and ranges, phrased in our own way.
"""
import random

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Elif", "Farid", "Grace", "Hiro", "Ines", "Jonas",
         "Kemi", "Luca", "Maya", "Nils", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara"]
ITEMS = ["apples", "stickers", "marbles", "books", "cookies", "stamps", "pens", "cards",
         "shells", "coins", "tickets", "plants", "cupcakes", "bottles", "balloons"]
TOPICS = ["photosynthesis", "the water cycle", "gravity", "a binary search", "compound interest",
          "the French Revolution", "volcanoes", "vaccines", "machine learning", "recycling",
          "the moon's phases", "supply and demand", "a hash table", "electric circuits",
          "the immune system", "climate", "a healthy breakfast", "time zones", "rainbows",
          "the printing press", "black holes", "public libraries", "bicycles", "honey bees"]
TASKS = ["learn a new language", "sleep better", "save money", "start running",
         "write a cover letter", "keep a plant alive", "study for an exam", "cook rice",
         "organize a small party", "reduce screen time", "prepare for a job interview"]

# Words and verbs for the short-answer prompts.
WORDS = ["planet", "candle", "rabbit", "guitar", "whistle", "pocket", "lemon", "castle",
         "dragon", "rocket", "jacket", "pillow", "tomato", "wallet", "ladder", "basket",
         "puzzle", "spider", "marble", "violin", "carpet", "button", "island", "cactus"]
ADJECTIVES = ["narrow", "noisy", "empty", "rough", "shallow", "cheap", "brave", "dull",
              "ancient", "wet", "loose", "sharp", "polite", "rare", "gentle", "thick"]
VERBS = ["jump", "write", "catch", "sing", "build", "throw", "teach", "bring", "climb",
         "draw", "speak", "choose", "laugh", "sleep", "carry", "forget"]
UNITS = [("minutes", "hours"), ("seconds", "minutes"), ("days", "weeks"), ("grams", "kilograms"),
         ("meters", "kilometers"), ("centimeters", "meters"), ("months", "years")]

SHORT = [
    "Quick one: what is {p} plus {q}? Reply with just the number.",
    "Compute {p} minus {q}. Reply with just the number.",
    "What do you get when you multiply {x} by {y}? Reply with just the number.",
    "How many {unit_small} are there in {y} {unit_big}? Reply with just the number.",
    "How many letters does the word '{word}' have? Reply with just the number.",
    "Which letter does the word '{word}' start with? Reply with one letter.",
    "Which letter does the word '{word}' end with? Reply with one letter.",
    "Give the plural of '{word}'. Reply with one word.",
    "Give the past tense of the verb '{verb}'. Reply with one word.",
    "Give a word that means the opposite of '{adjective}'. Reply with one word.",
]

MATH = [
    "{a} has {x} {item}. {b} gives {a} {y} more. How many {item} does {a} have now?",
    "{a} buys {x} packs of {item} with {y} in each pack. How many {item} is that in total?",
    "{a} had {z} {item} and gave {x} to {b}. How many {item} are left?",
    "A box holds {y} {item}. How many boxes are needed for {z} {item}?",
    "{a} earns ${x} per hour and works {y} hours. How much does {a} earn?",
    "What is {x} times {y}, plus {z}?",
    "A rectangle is {x} cm long and {y} cm wide. What is its perimeter?",
    "{a} saves ${x} each week. After {y} weeks, how much has {a} saved?",
    "If {x} friends share {z} {item} equally, how many does each get, and how many are left over?",
    "A car uses {x} liters of fuel per 100 km. How much fuel does it use for {z} km?",
    "What is {x}% of {z}?",
    "Solve for n: {x} n + {y} = {z}.",
]
GENERAL = [
    "Explain {topic} in simple terms.",
    "Give me three facts about {topic}.",
    "Write a short paragraph about {topic} for a ten-year-old.",
    "What are the main ideas behind {topic}?",
    "How can I {task}? Give a few steps.",
    "Give me some tips to {task}.",
    "Write a haiku about {topic}.",
    "Summarize why {topic} matters in two sentences.",
]


def fill(template, rng):
    unit_small, unit_big = rng.choice(UNITS)
    p = rng.randint(60, 480)
    return template.format(
        a=rng.choice(NAMES), b=rng.choice(NAMES), item=rng.choice(ITEMS),
        x=rng.randint(2, 19), y=rng.randint(2, 12), z=rng.randint(20, 240),
        p=p, q=rng.randint(11, p - 1), unit_small=unit_small, unit_big=unit_big,
        word=rng.choice(WORDS), adjective=rng.choice(ADJECTIVES), verb=rng.choice(VERBS),
        topic=rng.choice(TOPICS), task=rng.choice(TASKS))


def prompts(count, seed):
    """`count` distinct prompts: word problems, general requests and
    short-answer questions in turn."""
    rng = random.Random(seed)
    out, seen = [], set()
    pools = [MATH, GENERAL, SHORT]
    while len(out) < count:
        pool = pools[len(out) % len(pools)]
        p = fill(rng.choice(pool), rng)
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out
