"""Small example inputs for every kind of job, written by `bert-jax examples DIR`.

A clone holds no third-party data, so the README's recipes read these: the demo corpus (the
Python standard library's docstrings, see demo_corpus.py) as "your own text", and made-up
task files in the formats the commands read. The task files are drawn from templates and
word lists written for this project (no text taken from anywhere), deterministically for a
seed: film-review sentiment (a TSV, with a label and with a rating), named entities (CoNLL),
and reading comprehension (SQuAD v1.1 and v2.0 JSON). Evaluation rows use phrases and names
that training rows never show, so a score on them says something about what the pre-trained
model brings. Sentence pairs (example_pairs.py) and a treebank (example_treebank.py) are
written beside these by the same command.
"""

import json
import random

from bert_jax.storage import files
from input_pipeline import demo_corpus

# --- sentiment: "{subject} {verdict}." in several constructions; the label is the verdict's.
SUBJECTS = ["the film", "the acting", "the story", "the soundtrack", "the ending", "the dialogue",
            "the camera work", "the lead actor", "the pacing", "the script", "the set design",
            "the finale", "the cast", "the humour", "the special effects", "the first hour"]
POSITIVE = ["was wonderful", "kept me gripped", "made me laugh out loud", "is a joy to watch",
            "felt fresh and clever", "was moving", "is beautifully done", "was a delight",
            "surprised me in the best way", "deserves every award", "won me over",
            "is sharp and funny", "was brilliant", "stayed with me for days",
            "is warm and generous", "was worth every minute"]
NEGATIVE = ["was dull", "dragged on forever", "made no sense", "is a chore to sit through",
            "felt lazy and stale", "was painfully slow", "is badly done", "was a mess",
            "disappointed me", "is forgettable", "lost me early", "is flat and lifeless",
            "was awful", "bored me to tears", "is cold and empty", "was a waste of time"]
HELD_OUT_VERDICTS = 4  # the last 4 of each list appear in evaluation rows only

# --- named entities: CoNLL-2003's types; {PER}, {LOC}, {ORG} are filled with names below.
NER_TEMPLATES = [
    "{PER} flew from {LOC} to {LOC} on Monday .", "{ORG} opened a new office in {LOC} .",
    "{PER} joined {ORG} as chief engineer .", "{PER} met {PER} in {LOC} last week .",
    "Shares of {ORG} rose after {PER} spoke in {LOC} .",
    "{PER} , a spokesperson for {ORG} , declined to comment .",
    "The mayor of {LOC} thanked {ORG} for the donation .",
    "{ORG} and {ORG} agreed to merge , {PER} said .", "Rain delayed the final in {LOC} .",
    "{PER} won the race in {LOC} ahead of {PER} .", "{ORG} will build a bridge near {LOC} .",
    "Fans of {ORG} waited outside the hotel in {LOC} for {PER} ."]
NAMES = {
    "PER": ["Mara Quint", "Tobias Feld", "Ines Okafor", "Kofi Brandt", "Lena Sato", "Rafael",
            "Aiko Lindqvist", "Nils Moreau", "Priya Varga", "Oskar", "Amara Achebe", "Jonas Novak",
            "Elif Marsh", "Bruno Tallis", "Sunniva Oduya", "Teodor"],
    "LOC": ["Lisbon", "Oslo", "Nairobi", "Kyoto", "Porto Alegre", "New Haven", "Cape Town", "Lyon",
            "Busan", "Quebec", "Tallinn", "Valparaiso", "Galway", "Da Nang", "Tbilisi", "Perth"],
    "ORG": ["Northwind Traders", "Bluefin Labs", "Kestrel Airways", "Granite Bank",
            "Larkspur University", "Orbit Media", "Silver Pine Foundation", "Delta Rowing Club",
            "Harbour Council", "Copperleaf Motors", "Vantage Records", "Meridian Health",
            "Tidewater Ferries", "Ashgrove United", "Lumen Press", "Quarry Hill Rangers"]}
HELD_OUT_NAMES = 4  # the last 4 names of each type appear in evaluation sentences only

# --- reading comprehension: one paragraph per made-up town, six questions on it.
TOWN_PARTS = (["Ald", "Brack", "Corr", "Dun", "Fen", "Glen", "Harr", "Ivel", "Kel", "Lang",
               "Mar", "North", "Oak", "Pen", "Ray", "Stan", "Thorn", "Wex"],
              ["mere", "ford", "ton", "moor", "bridge", "hollow", "gate", "field", "wick", "stead"])
RIVERS = ["Avel", "Brisk", "Cole", "Dern", "Esk", "Fal", "Gray", "Hurl", "Isca", "Lune", "Mell",
          "Nadder", "Ouse", "Perry", "Rother", "Teme"]
INDUSTRIES = ["wool weaving", "clock making", "salt mining", "shipbuilding", "paper milling",
              "glass blowing", "cheese making", "rope making", "brewing", "lace making",
              "tin smelting", "pottery"]
PARAGRAPH = ("{town} is a market town on the {river} river. It was founded in {founded} by "
             "{founder}, who built the first mill there. For most of its history the main "
             "industry of {town} was {industry}. The town hall, finished in {hall}, still "
             "stands on the square. Today about {people} people live in {town}.")
QUESTIONS = [("When was {town} founded?", "founded"), ("Who founded {town}?", "founder"),
             ("Which river does {town} stand on?", "river"),
             ("What was the main industry of {town} for most of its history?", "industry"),
             ("In what year was the town hall of {town} finished?", "hall"),
             ("How many people live in {town} today?", "people")]
# SQuAD v2.0's unanswerable questions: the paragraph names no architect and no station.
UNANSWERABLE = ["Who designed the town hall of {town}?",
                "In what year did the railway reach {town}?"]

FILES = {  # name -> what it is (printed by the command; the README's recipes read them)
    "corpus.txt": "the demo corpus: the standard library's docstrings, one sentence a line, "
                  "a blank line between modules (vocab, create-data)",
    "sentiment_train.tsv": "400 made-up film-review sentences, columns sentence, label "
                           "(pos/neg) (finetune classify)",
    "sentiment_dev.tsv": "100 more, with verdicts training never shows (--eval, evaluate)",
    "sentiment_texts.txt": "4 unlabelled reviews, one a line (predict)",
    "ratings_train.tsv": "the 400 training sentences, columns sentence, label: a rating "
                         "from 1 to 5 (finetune regress)",
    "ratings_dev.tsv": "the 100 evaluation sentences rated (--eval, evaluate)",
    "ner_train.txt": "300 made-up sentences in CoNLL format, word and IOB2 tag (finetune ner)",
    "ner_dev.txt": "80 more, with names training never shows (--eval, evaluate, predict)",
    "squad_train.json": "SQuAD v1.1: 60 made-up town histories, 6 questions each "
                        "(finetune qa)",
    "squad_dev.json": "15 more towns, 90 questions (--eval, evaluate, predict)",
    "squad2_train.json": "SQuAD v2.0: 30 more towns, 6 questions each and 2 the paragraph "
                         "cannot answer (finetune qa)",
    "squad2_dev.json": "10 more towns, 80 questions, 20 unanswerable (--eval, predict)",
}


def _stars(verdict: str) -> float:
    """A verdict's rating: 5 or 4 for a positive one, 1 or 2 for a negative one."""
    if verdict in POSITIVE:
        return 5.0 - POSITIVE.index(verdict) % 2
    return 1.0 + NEGATIVE.index(verdict) % 2


def sentiment_rows(count: int, rng: random.Random,
                   evaluation: bool) -> list[tuple[str, str, float]]:
    """(sentence, label, rating from 1 to 5, above 3 exactly when the label is pos) rows;
    evaluation rows each use at least one held-out verdict."""
    held_out = {verdict for verdicts in (POSITIVE, NEGATIVE)
                for verdict in verdicts[-HELD_OUT_VERDICTS:]}
    pool = POSITIVE + NEGATIVE if evaluation else [
        verdict for verdict in POSITIVE + NEGATIVE if verdict not in held_out]

    def clause():
        verdict = rng.choice(pool)
        return f"{rng.choice(SUBJECTS)} {verdict}", "pos" if verdict in POSITIVE else "neg", verdict

    rows, seen = [], set()
    while len(rows) < count:
        (first, label, verdict), (second, second_label, second_verdict) = clause(), clause()
        form, stars = rng.randrange(4), _stars(verdict)
        if form == 0:
            text = first
        elif form == 1:  # the verdict after "but" decides
            text, label, verdict = f"{first}, but {second}", second_label, second_verdict
            stars = _stars(second_verdict)
        elif form == 2 and label == second_label:
            text, stars = f"{first} and {second}", (stars + _stars(second_verdict)) / 2
        elif form == 2:
            text = first
        else:  # a negated verdict: the other side, nearer the middle (5 -> 2, 1 -> 4)
            text, label = f"I can't say {first}", "neg" if label == "pos" else "pos"
            stars = (9.0 - stars) / 2
        text = text[0].upper() + text[1:] + "."
        if text not in seen and (not evaluation or verdict in held_out):
            seen.add(text)
            rows.append((text, label, stars))
    return rows


def _names(kind: str, evaluation: bool) -> list[str]:
    names = NAMES[kind]
    return names if evaluation else names[:-HELD_OUT_NAMES]


def ner_sentences(count: int, rng: random.Random, evaluation: bool) -> list[list[tuple[str, str]]]:
    """Sentences as (word, IOB2 tag) lists; evaluation ones each name a held-out entity."""
    held_out = {name for names in NAMES.values() for name in names[-HELD_OUT_NAMES:]}
    sentences = []
    while len(sentences) < count:
        words, used = [], []
        for token in rng.choice(NER_TEMPLATES).split():
            kind = token[1:-1] if token.startswith("{") else None
            if kind is None:
                words.append((token, "O"))
                continue
            name = rng.choice(_names(kind, evaluation))
            used.append(name)
            words.extend((word, ("B-" if index == 0 else "I-") + kind)
                         for index, word in enumerate(name.split()))
        if not evaluation or held_out & set(used):
            sentences.append(words)
    return sentences


def squad_data(towns: list[str], rng: random.Random, version_2: bool = False) -> dict:
    """SQuAD v1.1 JSON: a paragraph per town, each question's answer a span of it; v2.0 adds
    to each town UNANSWERABLE's questions (`is_impossible`, no answers)."""
    founders = [name for name in NAMES["PER"] if " " in name]
    articles = []
    for town in towns:
        facts = dict(town=town, river=rng.choice(RIVERS), founder=rng.choice(founders),
                     industry=rng.choice(INDUSTRIES), founded=str(rng.randrange(1150, 1600)),
                     hall=str(rng.randrange(1650, 1900)), people=f"{rng.randrange(2, 60)},"
                                                                 f"{rng.randrange(1, 10)}00")
        context = PARAGRAPH.format(**facts)
        questions = []
        for number, (question, fact) in enumerate(QUESTIONS):
            answer = facts[fact]
            assert context.count(answer) == 1, (answer, context)  # the span is unambiguous
            questions.append({"id": f"{town.lower()}-{number}", "question": question.format(
                **facts), "answers": [{"text": answer, "answer_start": context.index(answer)}]})
        if version_2:
            for question in questions:
                question["is_impossible"] = False
            questions.extend({"id": f"{town.lower()}-{len(QUESTIONS) + number}",
                              "question": question.format(town=town), "answers": [],
                              "is_impossible": True}
                             for number, question in enumerate(UNANSWERABLE))
        articles.append({"title": town, "paragraphs": [{"context": context, "qas": questions}]})
    return {"version": "v2.0" if version_2 else "1.1", "data": articles}


def _table(header: str, rows) -> str:
    """Tab-separated lines under `header`."""
    return header + "\n" + "".join("\t".join(map(str, row)) + "\n" for row in rows)


def write_examples(directory: str, seed: int = 0) -> dict[str, str]:
    """Writes FILES into `directory` (local or gs://, created if needed; each file whole or
    not at all); returns {path: description}."""
    files.makedirs(directory)
    rng = random.Random(seed)
    paths = {name: files.join(directory, name) for name in FILES}
    documents = demo_corpus.stdlib_documents()
    files.write_text(paths["corpus.txt"], demo_corpus.corpus_text(documents))
    train, dev = sentiment_rows(400, rng, False), sentiment_rows(100, rng, True)
    for split, rows in (("train", train), ("dev", dev)):
        files.write_text(paths[f"sentiment_{split}.tsv"], _table(
            "sentence\tlabel", [(text, label) for text, label, _ in rows]))
        files.write_text(paths[f"ratings_{split}.tsv"], _table(
            "sentence\tlabel", [(text, stars) for text, _, stars in rows]))
    files.write_text(paths["sentiment_texts.txt"], "A gripping, funny film.\nNot worth the "
                     "ticket.\nThe soundtrack was lovely, but the story went nowhere.\n"
                     "I loved every minute.\n")
    for name, count, evaluation in (("ner_train.txt", 300, False), ("ner_dev.txt", 80, True)):
        files.write_text(paths[name], "\n".join(
            "".join(f"{word} {tag}\n" for word, tag in sentence)
            for sentence in ner_sentences(count, rng, evaluation)))
    towns = [prefix + suffix for prefix in TOWN_PARTS[0] for suffix in TOWN_PARTS[1]]
    rng.shuffle(towns)
    for name, chosen in (("squad_train.json", towns[:60]), ("squad_dev.json", towns[60:75]),
                         ("squad2_train.json", towns[75:105]),
                         ("squad2_dev.json", towns[105:115])):
        data = squad_data(chosen, rng, version_2=name.startswith("squad2"))
        files.write_text(paths[name], json.dumps(data, indent=1) + "\n")
    return {paths[name]: description for name, description in FILES.items()}
